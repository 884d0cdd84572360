"""The operator's tools, run by the CLI as well as the daemon: installing the service, L4 maintenance.

``install`` writes the systemd units, the cron entries and the directories;
``maintenance`` is cleanup, backup and restore of the L4 store wherever it is
opened (inside the daemon, or offline from the CLI when the daemon is down).
"""

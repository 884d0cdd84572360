"""L4 lifecycle: the durable queue, cleanup, backups."""

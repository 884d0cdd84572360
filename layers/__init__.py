"""The four memory layers as libraries.

Each layer has one small public face and knows nothing of the daemon or of the
other layers; the daemon composes them.  Modules here that are not layers
(``ids``, ``yamlfile``) hold the few definitions every layer must agree on.
"""

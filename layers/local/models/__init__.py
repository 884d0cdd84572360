"""L3 models: the embedders."""

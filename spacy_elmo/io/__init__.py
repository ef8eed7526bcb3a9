"""Model formats: the native msgpack format, bilm-tf/AllenNLP HDF5, the arrays both hold, resolving a
path or a shipped name to a model, and atomic writes for every file the package keeps."""

"""Model formats (native msgpack, bilm-tf/AllenNLP HDF5, ELMoForManyLangs) read from any container (a
directory or a zip archive: `files.py`), `resolve.load_model` the one loader, and atomic writes for every
file the package keeps."""

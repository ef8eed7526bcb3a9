"""The one base of every "this model file is bad" error, so a caller catches one type whatever the format:
options, vocabularies, weights, ELMoForManyLangs files, archives and ONNX graphs."""


class ModelFileError(ValueError):
    """A model's files cannot be read as the model they claim to be; the message names the file and the key."""

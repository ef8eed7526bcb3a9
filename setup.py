"""spacy-elmo: ELMo (deep contextualized word representations) as a spaCy v3 plugin."""
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent
about: dict = {}
exec((ROOT / "spacy_elmo" / "about.py").read_text(), about)

setup(
    name="spacy-elmo",
    version=about["__version__"],
    description="ELMo biLM embeddings for spaCy: exact bilm-tf/AllenNLP weights, listeners, pretraining",
    long_description=(ROOT / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.9",
    packages=find_packages(include=["spacy_elmo", "spacy_elmo.*"]),
    include_package_data=True,
    package_data={"spacy_elmo": ["models/*/*", "configs/*.cfg", "py.typed"]},
    install_requires=[
        "spacy>=3.7,<4.0",
        "thinc>=8.2,<9.0",
        # CPU-only installs: install torch first from PyTorch's CPU wheels (see README); any torch in
        # this range that is already installed is kept.
        "torch>=2.1",
        "srsly>=2.4",
        "h5py>=3.8",
        "numpy>=1.23",
    ],
    extras_require={
        "cuda12x": ["cupy-cuda12x>=12.0"],
        "test": ["pytest>=7", "hypothesis>=6"],
        "project": ["matplotlib>=3.6"],
    },
    entry_points={
        "spacy_factories": ["elmo = spacy_elmo.pipeline:make_elmo"],
        # so that a pipeline saved after `replace_listeners` (no elmo pipe left) still finds its layers
        "spacy_architectures": [
            "spacy-elmo.BiLM.v1 = spacy_elmo.layers.bilm_model:BiLM_v1",
            "spacy-elmo.ScalarMix.v1 = spacy_elmo.layers.scalar_mix:ScalarMix_v1",
            "spacy-elmo.ElmoListener.v1 = spacy_elmo.layers.listener:ElmoListener_v1",
            "spacy-elmo.Elmo.v1 = spacy_elmo.layers.listener:Elmo_v1",
            "spacy-elmo.ElmoTok2Vec.v1 = spacy_elmo.layers.tok2vec:ElmoTok2Vec_v1",
        ],
        "spacy_cli": ["elmo = spacy_elmo.cli:elmo_cli"],
        "console_scripts": ["spacy-elmo = spacy_elmo.cli:main"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Framework :: spaCy",
    ],
)

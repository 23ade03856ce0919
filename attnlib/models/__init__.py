"""The small models the book trains and ships, and the tools to read them.

- ``tasks``       training data the book makes: recall, induction, its own text (lessons 01-09)
- ``train``       a short training loop, evaluation, the shipped models' recipes
- ``pretrained``  the trained models shipped in ``models/weights``, GQA/MLA conversions
- ``probes``      attention maps, head scores and ablations of a trained model (01, 03, 09)
- ``convert``     weights from Hugging Face's Llama and DeepSeek attention      (06, 07)
- ``assemble``    a whole decoder run from the reader's own pieces               (14)

The submodules load on first use (``attnlib.models.pretrained.load("book")`` works after
``import attnlib``), so that ``import attnlib`` does not read the training code.
"""

import importlib

_SUBMODULES = ("tasks", "train", "pretrained", "probes", "convert", "assemble")


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"attnlib.models.{name}")
    raise AttributeError(f"module 'attnlib.models' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_SUBMODULES})

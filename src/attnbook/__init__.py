"""attnbook: the package behind the open course on attention mechanisms.

Row convention (tokens are rows, as in PyTorch), any batch dimensions in front, computed on the
device and in the dtype of the inputs. :mod:`attnbook.formal` holds the column-convention
versions of *Formal Algorithms for Transformers*; :mod:`attnbook.plotting` the figure helpers.
"""

from . import formal
from .attention import apply_mask, attention, attention_scores
from .device import default_device
from .masks import causal_mask, padding_mask
from .softmax import softmax

__all__ = [
    "apply_mask",
    "attention",
    "attention_scores",
    "causal_mask",
    "default_device",
    "formal",
    "padding_mask",
    "plotting",
    "softmax",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    # matplotlib is imported only when a figure is drawn, so that code which only computes
    # (the tests, the grader) does not pay for it.
    if name == "plotting":
        import importlib

        return importlib.import_module(".plotting", __name__)
    raise AttributeError(f"module 'attnbook' has no attribute {name!r}")

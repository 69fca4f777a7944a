"""Where the course's folders are, for every test (the repository root is this folder's parent)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
EXERCISES = ROOT / "exercises"
SRC = ROOT / "src"

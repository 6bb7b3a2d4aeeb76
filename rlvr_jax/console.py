"""What every command-line entry point (train, evaluate, export) sets before the libraries it
uses are imported: no Hugging Face hub lookups (offline they hang ~50 s; nothing is
downloaded at run time) and none of the libraries' advice that is noise here (transformers'
"PyTorch was not found": torch is only a test dependency; absl's notes on orbax's own
metadata files at every restore)."""

import logging
import os


def quiet_offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    logging.getLogger("absl").setLevel(logging.ERROR)
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # "no libtpu" probing

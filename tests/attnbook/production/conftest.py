"""The production tests run on one CPU thread: their tensors are tiny, and on a shared machine
PyTorch's thread pool spends more time waiting for a second core than computing."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

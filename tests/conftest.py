"""Suite-wide set-up."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """One intra-op thread: the tests' tensors are small, and on the shared 2-core box torch's
    OpenMP threads fight TVM's and the other test processes (steps get several times slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

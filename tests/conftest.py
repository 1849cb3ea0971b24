import pytest
import torch


def pytest_collection_modifyitems(config, items):
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    no_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine)")
    one_gpu = pytest.mark.skip(reason=f"needs 2 CUDA GPUs, found {gpus} (run on a multi-GPU device machine)")
    for item in items:
        if "gpu" in item.keywords and gpus == 0:
            item.add_marker(no_gpu)
        elif "multigpu" in item.keywords and gpus < 2:
            item.add_marker(one_gpu)

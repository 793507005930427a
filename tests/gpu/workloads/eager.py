"""Fixture workload: a small MLP trained for a few steps, with pageable and pinned host-to-device
copies, a cudaMemset, and a host sync (.item()) per step."""

import ctypes
import glob
import os
import sys

import torch


def cudart():
    """The CUDA runtime torch already loaded (same soname, so dlopen returns that copy)."""
    for entry in sys.path:
        for path in sorted(
            glob.glob(os.path.join(entry or ".", "nvidia", "*", "lib", "libcudart.so.*"))
        ):
            return ctypes.CDLL(path)
    return ctypes.CDLL(f"libcudart.so.{torch.version.cuda.split('.')[0]}")


def clear_with_memset(t):
    lib = cudart()
    lib.cudaMemset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    assert lib.cudaMemset(t.data_ptr(), 0, t.numel() * t.element_size()) == 0


def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def main():
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    host_x = torch.randn(128, 256)
    pinned_y = torch.randn(128, 64).pin_memory()
    for _ in range(3):
        x = host_x.cuda()
        y = pinned_y.cuda(non_blocking=True)
        train_step(model, opt, x, y)
    buf = torch.empty(1 << 20, device="cuda")
    clear_with_memset(buf)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

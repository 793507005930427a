"""Fixture workload: two threads on two streams launching at the same time, one only matrix
products (worker_matmul), one only elementwise adds (worker_add): no record may land in the
other thread's context."""

import threading

import torch


def worker_matmul(barrier, n):
    a = torch.randn(256, 256, device="cuda")
    with torch.cuda.stream(torch.cuda.Stream()):
        barrier.wait()
        for _ in range(n):
            a = torch.mm(a, a).clamp_(-1, 1)
        torch.cuda.current_stream().synchronize()


def worker_add(barrier, n):
    b = torch.randn(1 << 16, device="cuda")
    with torch.cuda.stream(torch.cuda.Stream()):
        barrier.wait()
        for _ in range(n):
            b = torch.add(b, 1.0)
        torch.cuda.current_stream().synchronize()


def main():
    torch.zeros(1, device="cuda")
    barrier = threading.Barrier(2)
    threads = [
        threading.Thread(target=worker_matmul, args=(barrier, 40)),
        threading.Thread(target=worker_add, args=(barrier, 40)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()

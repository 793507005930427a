"""Fixture workload: a model captured into a CUDA graph by capture_model() and replayed by
replay_model(); the kernels belong under the capture site."""

import torch


def capture_model(model, static_x):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = model(static_x)
    return graph, static_y


def replay_model(graph, n):
    for _ in range(n):
        graph.replay()
    torch.cuda.synchronize()


def main():
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 128), torch.nn.Tanh()
    ).cuda()
    static_x = torch.randn(64, 128, device="cuda")
    with torch.no_grad():
        graph, _ = capture_model(model, static_x)
        replay_model(graph, 4)


if __name__ == "__main__":
    main()

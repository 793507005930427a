"""Fixture workload: step-sampled tracing (the default) over 60 AdamW steps of a small MLP, each
step ended by optimizer.step(): the fixture holds the traced spans, and the launches and records
of traced steps only."""

import torch


def main():
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64)
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(128, 256, device="cuda")
    y = torch.randn(128, 64, device="cuda")
    for _ in range(60):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

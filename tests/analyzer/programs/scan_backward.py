"""A running sum over short rows (cumulative rewards over a 32-step horizon) whose backward is the
same cumsum between two flips: 6-7x its forward on CPU, as measured on the 2-core development VM,
yet nothing to reformulate. backward-imbalance must stay silent on it."""

import torch


def main():
    torch.manual_seed(0)
    rewards = torch.nn.Parameter(torch.randn(16384, 32, dtype=torch.float64))
    discount = torch.rand(16384, 32, dtype=torch.float64)
    opt = torch.optim.SGD([rewards], lr=0.01)
    for _ in range(20):
        returns = torch.cumsum(rewards, dim=-1)
        loss = (returns * discount).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

"""Log-probabilities computed as log(softmax(x)): the custom-rule example of docs/analyzer.md."""

import torch


def main():
    torch.manual_seed(0)
    x = torch.randn(512, 4096, requires_grad=True)
    for _ in range(20):
        logp = torch.log(torch.softmax(x, dim=-1))
        logp.mean().backward()
    print(f"{x.grad.abs().sum().item():.4f}")


if __name__ == "__main__":
    main()

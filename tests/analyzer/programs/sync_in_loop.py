"""A training loop that reads the loss back to the host every step (`.item()`, printing the
tensor, `if loss < best:`): each is a host-device synchronization on a GPU. Fixed (--fixed): the
loss is accumulated on the device and read once at the end."""

import argparse
import io

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 32), torch.randn(64, 1)
    log = io.StringIO()
    best = float("inf")
    running = torch.zeros(())
    best_t = torch.full((), float("inf"))
    for step in range(args.steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.fixed:
            running += loss.detach()
            best_t = torch.minimum(best_t, loss.detach())
        else:
            print(f"step {step} loss", loss, file=log)
            if loss < best:
                best = loss.item()
    if args.fixed:
        best = best_t.item()
        print(f"mean loss {(running / args.steps).item():.4f}", file=log)
    print(f"final {loss.item():.4f} best {best:.4f}")


if __name__ == "__main__":
    main()

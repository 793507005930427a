"""gnn case study, after version (see gnn.py)."""

from gnn import main

if __name__ == "__main__":
    main(fixed=True)

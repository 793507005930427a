"""gnn case study, before version (see gnn.py)."""

from gnn import main

if __name__ == "__main__":
    main(fixed=False)

"""dlrm_small case study, after version (see dlrm_small.py)."""

from dlrm_small import main

if __name__ == "__main__":
    main(fixed=True)

"""dlrm_small case study, before version (see dlrm_small.py)."""

from dlrm_small import main

if __name__ == "__main__":
    main(fixed=False)

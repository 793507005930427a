"""transformer case study, before version (see transformer.py)."""

from transformer import main

if __name__ == "__main__":
    main(fixed=False)

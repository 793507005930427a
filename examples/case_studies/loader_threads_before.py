"""loader_threads case study, before version (see loader_threads.py)."""

from loader_threads import main

if __name__ == "__main__":
    main(fixed=False)

"""unet case study, after version (see unet.py)."""

from unet import main

if __name__ == "__main__":
    main(fixed=True)

"""``python -m dynoq``: the same command line as the ``dynoq`` console script."""

from .cli import main

if __name__ == "__main__":
    main()

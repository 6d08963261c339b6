"""``python -m ckptscan``: the same command line as the ``ckptscan`` script."""

from ckptscan.cli import main

if __name__ == "__main__":
    main(prog_name="ckptscan")

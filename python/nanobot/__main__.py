"""``python -m nanobot …``: replaces this interpreter with the ``nanobot`` executable, same arguments."""

from nanobot.cli.entry import main

if __name__ == "__main__":
    main()

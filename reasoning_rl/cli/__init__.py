"""The ``rrl`` command: ``app`` (the typer app, every command's options) and one module per command body that
does more than call a package (``train``, ``sft``, ``eval``), over ``common`` (one-line errors, the console, the
process settings, the config prologue). Heavy imports happen inside the bodies, so ``rrl --help`` stays
instant."""

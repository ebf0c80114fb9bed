"""`python -m dflash2_backport`, and the `dflash2-backport` command."""


def main() -> None:
    # Signals first: typer and the tool's modules take a while to import.
    from .utils import interrupts

    interrupts.stop_before_start()
    from .cli.main import main as run

    run()


if __name__ == "__main__":
    main()

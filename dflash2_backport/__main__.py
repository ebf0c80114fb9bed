"""`python -m dflash2_backport`, and the `dflash2-backport` command."""


def main() -> None:
    # Signals first: typer and the tool's modules take a while to import.
    from .utils import interrupts, streams

    interrupts.stop_before_start()
    streams.guard()
    from .cli.main import main as run

    try:
        run()
    finally:
        streams.report_lost()
        interrupts.quiet_from_here()


if __name__ == "__main__":
    main()

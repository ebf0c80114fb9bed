"""Backport DFlash2 speculative decoding to vLLM 0.27.1, 0.27.0 and 0.26.0."""

from pathlib import Path as _Path

__version__ = "0.1.0"

# The wheel installs the edits and the vLLM modules in this package, as
# `transforms` and `modules`; a source checkout keeps them at the repository's
# top, beside this folder. A checkout on sys.path that was never installed
# finds those two there, and nothing else of the repository's top.
_checkout = _Path(__file__).resolve().parent.parent
if not _Path(__file__).with_name("transforms").is_dir() and (
    _checkout / "transforms" / "__init__.py"
).is_file():
    import importlib.util as _util
    import sys as _sys

    class _CheckoutFolders:
        _names = {f"{__name__}.{folder}": _checkout / folder for folder in ("transforms", "modules")}

        @classmethod
        def find_spec(cls, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
            folder = cls._names.get(fullname)
            if folder is None:
                return None
            return _util.spec_from_file_location(
                fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
            )

    _sys.meta_path.append(_CheckoutFolders)

"""Backport DFlash2 speculative decoding to vLLM 0.27.1, 0.27.0 and 0.26.0."""

import os as _os

__version__ = "0.1.0"

# The wheel installs the edits and the vLLM modules in this package, as
# `transforms` and `modules`; a source checkout keeps them at the repository's
# top, beside this folder. A checkout on sys.path that was never installed
# finds those two there, and nothing else of the repository's top.
_here = _os.path.dirname(__file__)
_checkout = _os.path.dirname(_os.path.abspath(_here))
if not _os.path.isdir(_os.path.join(_here, "transforms")) and _os.path.isfile(
    _os.path.join(_checkout, "transforms", "__init__.py")
):
    import importlib.util as _util
    import sys as _sys

    class _CheckoutFolders:
        _names = {
            f"{__name__}.{folder}": _os.path.join(_checkout, folder)
            for folder in ("transforms", "modules")
        }

        @classmethod
        def find_spec(cls, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
            folder = cls._names.get(fullname)
            if folder is None:
                return None
            return _util.spec_from_file_location(
                fullname,
                _os.path.join(folder, "__init__.py"),
                submodule_search_locations=[folder],
            )

    _sys.meta_path.append(_CheckoutFolders)

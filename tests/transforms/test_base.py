import libcst as cst

from dflash2_backport.transforms._base import BackportCodemod


class Inserts(BackportCodemod):
    """Puts a method with a docstring and a blank line into the class `C`."""

    EDIT = PATH = DESCRIPTION = "test"

    def backport(self, tree: cst.Module) -> cst.Module:
        (cls,) = tree.body
        method = self.statement('def m(self):\n    """One.\n\n    Two."""\n')
        line = self.statement("\n# Why.\nx = 1\n")
        body = cls.body.with_changes(body=[*cls.body.body, method, line])
        return tree.with_changes(body=[cls.with_changes(body=body)])


def test_inserted_code_takes_the_files_newlines_and_indents_no_blank_line() -> None:
    source = "class C:\r\n    pass\r\n"
    out = Inserts().transform_module(cst.parse_module(source)).code
    assert out == (
        "class C:\r\n    pass\r\n"
        '    def m(self):\r\n        """One.\r\n\r\n    Two."""\r\n'
        "\r\n    # Why.\r\n    x = 1\r\n"
    )

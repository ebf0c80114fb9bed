import libcst as cst

from dflash2_backport.transforms._base import BackportCodemod, pending
from dflash2_backport.transforms.hunks import Edit, Hunk

INSERT = Hunk("insert", "class C, last", None, "", "to test placement")


class Inserts(BackportCodemod):
    """Puts a method with a docstring and a blank line into the class `C`."""

    SPEC = Edit("test", "test.py", "test", (INSERT,))

    def judge(self, tree: cst.Module) -> dict:
        (cls,) = tree.body
        return {INSERT.name: pending(cls)}

    def forward(self, tree: cst.Module, sites: dict) -> cst.Module:
        cls = sites[INSERT.name]
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

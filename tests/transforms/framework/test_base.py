import libcst as cst

from dflash2_backport.transforms.framework.writing import Writer


def test_inserted_code_takes_the_files_newlines_and_indents_no_blank_line() -> None:
    source = "class C:\r\n    pass\r\n"
    writer = Writer()
    writer.module = tree = cst.parse_module(source)
    (cls,) = tree.body
    assert isinstance(cls, cst.ClassDef)
    method = writer.statement('def m(self):\n    """One.\n\n    Two."""\n')
    line = writer.statement("\n# Why.\nx = 1\n")
    body = cls.body.with_changes(body=[*cls.body.body, method, line])
    out = tree.with_changes(body=[cls.with_changes(body=body)]).code
    assert out == (
        "class C:\r\n    pass\r\n"
        '    def m(self):\r\n        """One.\r\n\r\n    Two."""\r\n'
        "\r\n    # Why.\r\n    x = 1\r\n"
    )

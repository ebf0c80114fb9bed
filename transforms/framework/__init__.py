"""What every edit is built from, and is no edit itself: the declarations
(edit.py), the source a judge reads (source.py), the verdicts (vocabulary.py),
judging by meaning (meaning.py, names.py, judging.py, in_place.py), and the
libcst writing (writing/)."""

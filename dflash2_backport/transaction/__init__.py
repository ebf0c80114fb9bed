"""The all-or-nothing commit, its lock, the files it may write, and
finishing or dropping a commit that a killed run left."""

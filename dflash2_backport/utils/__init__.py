"""What every part of the tool uses: its errors, signal handling, reading
and writing a tree's files safely, colour. Imports nothing of the tool above."""

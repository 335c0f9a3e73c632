"""Checks write.test's files: the link is still a link, the rewritten file
kept its mode 0640, and the formatted file was not rewritten."""
import os
import stat
import sys

d = sys.argv[1]
assert os.path.islink(os.path.join(d, "link.moe")), "the link was replaced by a file"
mode = stat.S_IMODE(os.stat(os.path.join(d, "messy.moe")).st_mode)
assert mode == 0o640, "mode %o, expected 640" % mode
mtime = os.stat(os.path.join(d, "formatted.moe")).st_mtime
assert mtime < 1e9 + 1e8, "formatted.moe was rewritten (mtime %s)" % mtime

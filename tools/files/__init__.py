"""Files given to a run: what they are (``sniff``, ``kind_of``), their text (``extract``) and images made fit
for the model (``prepare_image``), both read in a bounded child process (``limit_readers`` caps how many run at
once). Hostile or broken files end in ``FileUnreadable`` with a message for the user, never in a crash or a
blocked worker."""

from tools.errors import FileUnreadable
from tools.files.child import limit_readers
from tools.files.extract import Extracted, extract
from tools.files.images import PreparedImage, prepare_image
from tools.files.sniff import Kind, kind_of, sniff

__all__ = ["Extracted", "FileUnreadable", "Kind", "PreparedImage", "extract", "kind_of", "limit_readers",
           "prepare_image", "sniff"]

"""Files given to a run: what they are (``sniff``, ``kind_of``), their text (``extract``) and images made fit
for the model (``prepare_image``). Hostile or broken files end in ``FileUnreadable`` with a message for the
user, never in a crash or a blocked worker."""

from tools.errors import FileUnreadable
from tools.files.extract import Extracted, extract
from tools.files.images import prepare_image
from tools.files.sniff import Kind, kind_of, sniff

__all__ = ["Extracted", "FileUnreadable", "Kind", "extract", "kind_of", "prepare_image", "sniff"]

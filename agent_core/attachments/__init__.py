"""Files people send, as the runtime handles them: safe names, the type from the content,
conversion in a capped child process (documents to text, images resized), and the images
of a model call. Fetching them from a platform is the gateway's part."""

from .convert import IMAGE_BYTES, IMAGE_EDGE, Converted, ConvertLimits, convert
from .names import safe_name, unique_name
from .sniff import Converter, Sniffed, sniff

__all__ = ["IMAGE_BYTES", "IMAGE_EDGE", "ConvertLimits", "Converted", "Converter", "Sniffed",
           "convert", "safe_name", "sniff", "unique_name"]

"""An example Tocsin plug-in channel: JSON lines over TCP (kind ``example_lines``)."""

from tocsin_example_channel.channel import LinesChannel, LinesConfig
from tocsin_example_channel.server import LinesServer

__all__ = ["LinesChannel", "LinesConfig", "LinesServer"]

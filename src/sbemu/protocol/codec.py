"""AMQP 1.0 type system: decode, skip and encode values ([AMQP 1.0 1], types.xml).

The names the rest of the program uses, from the three modules that own them: the value
types (protocol/amqptypes.py), the decoder (protocol/decoder.py) and the encoder
(protocol/encoder.py). Pure stdlib, and on the hot path. ``_decode``, ``_skip`` and ``_WIDTH``
are exported too: the fast forms without the exception translation, for the section scanner,
the rebuilder and the frame filters, which translate failures themselves.

Python mapping used by :func:`decode` and :func:`encode`:

* null -> ``None``; boolean -> ``bool``; every integer type -> ``int``
* float/double -> ``float``; decimal32/64/128 -> raw ``bytes``; char -> ``str``
* timestamp -> :class:`Timestamp` (``int`` ms since the Unix epoch)
* uuid -> ``uuid.UUID``; binary -> ``bytes``; string -> ``str``; symbol -> :class:`Symbol`
* list -> ``list``; map -> ``dict``; array -> ``list``
* described -> :class:`Described` (descriptor is an ``int`` or a :class:`Symbol`)
"""

from __future__ import annotations

from . import amqptypes, decoder, encoder
from .amqptypes import *  # noqa: F403 - each module's __all__ is the list of what it owns
from .decoder import *  # noqa: F403
from .decoder import _WIDTH as _WIDTH
from .decoder import _decode as _decode
from .decoder import _skip as _skip
from .encoder import *  # noqa: F403

__all__ = [*amqptypes.__all__, *decoder.__all__, *encoder.__all__]

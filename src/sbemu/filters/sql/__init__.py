"""Service Bus SQL filter and SQL rule action language: lexer, parser, compiled evaluator.

The rooms: ``lexer`` (text to tokens), ``parser`` (tokens to compiled nodes), ``evaluator``
(the nodes, closures over a message), ``values`` (what the operators do to values),
``message`` (the message view and its property lookups), ``errors``, and ``compiled`` (the
filter and action objects the rest of the program holds).

Sources (Microsoft Learn, azure-docs repository):

* "Subscription Rule SQL Filter syntax" (``service-bus-messaging-sql-filter``),
* "Subscription Rule SQL Action syntax" (``service-bus-messaging-sql-rule-action``),
* "Set subscription filters" (``service-bus-filter-examples``) and "Messages, payloads, and
  serialization" (``service-bus-messages-payloads``, the list of system properties).

An expression is parsed once into a tree of closures ``fn(msg) -> value``; ``matches`` only calls
the root closure. Constant sub-expressions are folded at compile time, and a LIKE with a constant
pattern compiles its regular expression once.

Grammar (the documented one; extensions are marked +)::

    predicate  := NOT predicate | predicate AND predicate | predicate OR predicate
                | expression {= | <> | != | > | >= | < | <=} expression
                | expression IS [NOT] NULL          (+ any expression, not only a property)
                | expression [NOT] IN (expression [, ...n])
                | expression [NOT] LIKE pattern [ESCAPE escape_char]
                | EXISTS (property)
                | (predicate)
                | expression                        (+ a bare boolean, e.g. a bool property)
    expression := constant | function | property | @parameter
                | expression {+ | - | * | / | %} expression | {+ | -} expression | (expression)
    property   := [sys. | user.] (regular_identifier | [delimited ]] ] | "quoted "" ")
    constant   := 'string''s' | 1894 | 1894.1204 | 101.5E5 | TRUE | FALSE | NULL
    function   := newid() | property(name) | p(name)

    action     := statement [[; | ,] statement ...] [;]
    statement  := SET property = expression | REMOVE property

Precedence, loosest first: OR, AND, NOT, comparison / IS / IN / LIKE, + -, * / %, unary + -.
Keywords, function names, ``sys`` / ``user`` and property names are case-insensitive (a user
property is looked up by its exact name first, then case-insensitively).

Values: None is SQL NULL / "unknown"; bool; int (Int64 semantics: integer literals must fit,
integer arithmetic wraps like unchecked C#); float (System.Double); str; datetime; timedelta;
uuid.UUID (newid()); bytes. A property that does not exist evaluates as NULL.

Semantics (the doc says operators "follow C# implicit conversion semantics whenever possible"):

* Three-valued logic exactly as the doc's AND / OR tables; NOT unknown is unknown. A filter
  matches only when its predicate is TRUE.
* Comparisons: any NULL operand gives unknown. int and float compare numerically. Values of
  incompatible kinds (string vs number, bool vs number, Guid vs string, ...) compare FALSE for
  every operator, ``<>`` included, and raise nothing. Strings compare ordinally (case-sensitive);
  ordering (< <= > >=) is defined for numbers, strings, datetimes (naive ones taken as UTC) and
  timedeltas; for bool, Guid and bytes only = and <> are defined, ordering them is FALSE.
* IN: unknown if the left operand is NULL; otherwise TRUE if it equals (as ``=``) any non-NULL
  list item, else FALSE. NOT IN is NOT of that.
* LIKE: ``%`` any run, ``_`` one character, the optional escape character makes the next
  character literal; case-sensitive; the whole string must match. Any NULL operand gives
  unknown; a non-string left operand gives FALSE; a non-string pattern or an escape that is not
  one character raises FilterEvaluationError (FilterSyntaxError when they are constants).
* Arithmetic: NULL operand gives NULL. int op int stays int (``/`` truncates toward zero and
  ``%`` takes the dividend's sign, as C#); int with float gives float; string + string
  concatenates; datetime - datetime, datetime +- timedelta and timedelta +- timedelta work.
  Anything else (string + number, bool arithmetic, ...) raises FilterEvaluationError, and so does
  a division or modulo by zero, integer or float (C# would give Infinity/NaN for doubles; we
  raise, so that such a filter dead-letters instead of silently matching).
* ``sys.<name>``: the names below, case-insensitively, with ``Subject`` an alias of ``Label``
  (and ``ScheduledEnqueueTime``, ``EnqueuedTime``, ``ExpiresAt``, ``LockedUntil``,
  ``TransactionPartitionKey`` aliases from the newer SDKs). A name that is neither known nor a
  key of ``MessageView.system`` raises FilterEvaluationError when evaluated, as the doc says
  ("An attempt to evaluate a non-existent system property throws a FilterException").
  EXISTS(sys.X) is TRUE when the value is not None, and never raises.
* EXISTS(user property) is TRUE when the key is present, even with a None value;
  ``IS NULL`` is TRUE when the property is absent or None.
* ``property(name)`` / ``p(name)``: ``name`` is any string expression; a ``sys.`` or ``user.``
  prefix selects the scope (default user). ``newid()`` returns a fresh ``uuid.UUID``.
* ``@name`` parameters (the SDKs' ``SqlRuleFilter.Parameters``) are bound from the
  ``parameters`` mapping at compile time (keys with or without the ``@``, case-insensitive).

Rule actions: statements run in order on a copy, so a later one sees an earlier one's result.
``SET`` on a user property keeps the existing key's spelling if one matches case-insensitively
and converts int to float when the existing value is a float (the only implicit numeric
conversion C# makes); ``REMOVE`` deletes it (no-op when absent). ``SET`` / ``REMOVE`` on a
read-only or unknown system property is a FilterSyntaxError at compile time; string system
properties accept str, None or a UUID (stored as its string), time ones datetime/timedelta/None;
REMOVE of a system property sets it to None. Anything else raises FilterEvaluationError.
"""

from __future__ import annotations

from .compiled import FalseFilter, SqlFilter, SqlRuleAction, TrueFilter
from .errors import FilterEvaluationError, FilterSyntaxError
from .message import (
    READONLY_SYSTEM_PROPERTIES,
    SYSTEM_PROPERTIES,
    MessageView,
    canonical_system_name,
)
from .parser import MAX_EXPRESSION_DEPTH, MAX_NESTING

__all__ = [
    "MAX_EXPRESSION_DEPTH",
    "MAX_NESTING",
    "FilterEvaluationError",
    "FilterSyntaxError",
    "FalseFilter",
    "MessageView",
    "READONLY_SYSTEM_PROPERTIES",
    "SYSTEM_PROPERTIES",
    "SqlFilter",
    "SqlRuleAction",
    "TrueFilter",
    "canonical_system_name",
]

"""sbemu's stand-in for ``devtools_testutils``, the test tooling of the azure-sdk-for-python repo.

The azure-servicebus tests import it for recording (test proxy, sanitizers, matchers), for
Azure Resource Manager preparers and for ``get_credential``. Against sbemu every test runs live
and nothing is recorded, so the recording parts pass the test through unchanged; the preparers
the Service Bus tests use live in our ``servicebus_preparer`` and ``powershell_preparer``;
``get_credential`` hands out the namespace's shared access key (sbemu has no Azure AD).
"""

from __future__ import annotations

from .credentials import get_credential
from .powershell_preparer import PowerShellPreparer
from .preparers import (
    AbstractPreparer,
    CachedResourceGroupPreparer,
    FakeResource,
    RandomNameResourceGroupPreparer,
    ResourceGroupPreparer,
)
from .recording import (
    AzureMgmtRecordedTestCase,
    AzureRecordedTestCase,
    recorded_by_proxy,
    set_custom_default_matcher,
)
from .sanitizers import (
    add_general_regex_sanitizer,
    add_oauth_response_sanitizer,
    add_remove_header_sanitizer,
)

__all__ = [
    "AbstractPreparer",
    "AzureMgmtRecordedTestCase",
    "AzureRecordedTestCase",
    "CachedResourceGroupPreparer",
    "FakeResource",
    "PowerShellPreparer",
    "RandomNameResourceGroupPreparer",
    "ResourceGroupPreparer",
    "add_general_regex_sanitizer",
    "add_oauth_response_sanitizer",
    "add_remove_header_sanitizer",
    "get_credential",
    "recorded_by_proxy",
    "set_custom_default_matcher",
]

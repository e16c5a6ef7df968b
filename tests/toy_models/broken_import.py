"""A modeling module whose import fails, as a vendored file with a missing dependency would."""

import a_package_that_is_not_installed  # noqa: F401

"""AWS error codes classified once (Karpenter AWS ``pkg/errors/errors.go``).

Every module of :mod:`karpy.aws` asks these helpers instead of matching error strings itself, so the
meaning of a code (gone, out of capacity, not allowed) is decided in one place.
"""

from __future__ import annotations

from typing import Final

from botocore.exceptions import ClientError

# Codes meaning "the thing does not exist (any more)".
NOT_FOUND_CODES: Final = frozenset(
    {
        "InvalidInstanceID.NotFound",
        "InvalidInstanceID.Malformed",
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateName.NotFound",
        "InvalidAMIID.NotFound",
        "InvalidSubnetID.NotFound",
        "InvalidGroup.NotFound",
        "NoSuchEntity",
        "ParameterNotFound",
        "ResourceNotFoundException",
    }
)

# Codes meaning "no capacity for this offering right now": the offering goes into the ICE cache for 3 minutes
# (Karpenter v1.15 ``unfulfillableCapacityErrorCodes``, pkg/errors/errors.go; the last two also mark a capacity
# reservation full or reclaimed), plus EC2's ``InsufficientCapacityOnHost`` (dedicated hosts), which karpy adds.
ICE_CODES: Final = frozenset(
    {
        "InsufficientInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "UnfulfillableCapacity",
        "Unsupported",
        "InsufficientFreeAddressesInSubnet",
        "MaxFleetCountExceeded",
        "SpotMaxPriceTooLow",
        "ReservationCapacityExceeded",
        "InvalidCapacityReservationState.Unavailable",
        "InsufficientCapacityOnHost",
    }
)

# The service-linked role for spot cannot be created: every spot offering is unusable.
SPOT_ROLE_CODES: Final = frozenset({"AuthFailure.ServiceLinkedRoleCreationNotPermitted"})

UNAUTHORIZED_CODES: Final = frozenset(
    {"UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "AuthFailure", "InvalidClientTokenId"}
)

ALREADY_EXISTS_CODES: Final = frozenset(
    {"EntityAlreadyExists", "InvalidLaunchTemplateName.AlreadyExistsException", "LimitExceeded"}
)

# A launch template that vanished between the cache lookup and CreateFleet.
LAUNCH_TEMPLATE_NOT_FOUND_CODES: Final = frozenset(
    {"InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound"}
)


def error_code(err: BaseException) -> str:
    """The AWS error code of a botocore ``ClientError`` ("" for anything else)."""
    if isinstance(err, ClientError):
        return str((err.response.get("Error") or {}).get("Code") or "")
    return ""


def is_not_found(err: BaseException | str) -> bool:
    """True for "does not exist" codes (instance, launch template, IAM entity, SSM parameter, …)."""
    code = err if isinstance(err, str) else error_code(err)
    return code in NOT_FOUND_CODES or code.endswith(".NotFound")


def is_ice(code: str) -> bool:
    """True when ``code`` means insufficient capacity (Karpenter's unfulfillable-capacity codes)."""
    return code in ICE_CODES


def is_unauthorized(err: BaseException | str) -> bool:
    """True for permission errors (the caller's IAM policy lacks an action)."""
    code = err if isinstance(err, str) else error_code(err)
    return code in UNAUTHORIZED_CODES


def is_already_exists(err: BaseException | str) -> bool:
    """True when a create call raced with another and the resource exists already."""
    code = err if isinstance(err, str) else error_code(err)
    return code in ALREADY_EXISTS_CODES or code.endswith("AlreadyExists") or code.endswith("Duplicate")


def is_launch_template_not_found(err: BaseException | str) -> bool:
    """True when CreateFleet referenced a launch template that no longer exists (retry once after re-creating)."""
    code = err if isinstance(err, str) else error_code(err)
    return code in LAUNCH_TEMPLATE_NOT_FOUND_CODES

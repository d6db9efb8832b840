"""The interruption queue on SQS (Karpenter AWS ``pkg/providers/sqs``), implementing
:class:`~karpy.cloudprovider.types.InterruptionQueue`.

``INTERRUPTION_QUEUE`` is a queue *name*: its URL is resolved with GetQueueUrl on first use and kept (asked
again after a failure, in case the queue was re-created). ReceiveMessage long-polls with
``WaitTimeSeconds=20``, ``MaxNumberOfMessages=10`` and ``VisibilityTimeout=20`` (Karpenter's values: a message
whose handling fails reappears after 20 s). Bodies are parsed by :mod:`karpy.aws.messages`, which never
raises, so every received message comes back with a kind (possibly ``invalid``/``no_op``) and its receipt
handle for DeleteMessage.
"""

from __future__ import annotations

from typing import Any, Final

import structlog

from karpy.aws import messages
from karpy.aws.errors import error_code
from karpy.cloudprovider.types import CloudProviderError, QueuedMessage
from karpy.runtime.fence import NotLeader

log = structlog.get_logger("karpy.aws.sqs")
WAIT_TIME_SECONDS: Final = 20
MAX_MESSAGES: Final = 10
VISIBILITY_TIMEOUT: Final = 20


class SQSInterruptionQueue:
    """Long-polls one SQS queue. ``sqs`` is an open aiobotocore SQS client; ``queue_name`` the queue's name.

    ``wait_time_seconds`` and ``visibility_timeout`` default to Karpenter's 20 s (tests may shorten them).
    """

    def __init__(
        self,
        sqs: Any,
        queue_name: str,
        *,
        wait_time_seconds: int = WAIT_TIME_SECONDS,
        visibility_timeout: int = VISIBILITY_TIMEOUT,
    ) -> None:
        self.sqs = sqs
        self.queue_name = queue_name
        self.wait_time_seconds = wait_time_seconds
        self.visibility_timeout = visibility_timeout
        self._url: str | None = None

    async def url(self) -> str:
        """The queue URL (GetQueueUrl once, cached).

        Raises:
            CloudProviderError: the queue does not exist or SQS refused.
        """
        if self._url is None:
            try:
                response = await self.sqs.get_queue_url(QueueName=self.queue_name)
            except Exception as err:
                code = error_code(err) or type(err).__name__
                raise CloudProviderError(f"GetQueueUrl {self.queue_name!r}: {code}: {err}") from err
            self._url = str(response["QueueUrl"])
        return self._url

    async def receive(self) -> list[QueuedMessage]:
        """Up to 10 messages, each parsed; [] when the long poll ends empty.

        Raises:
            CloudProviderError: the queue could not be read (the cached URL is forgotten).
        """
        url = await self.url()
        try:
            response = await self.sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=MAX_MESSAGES,
                WaitTimeSeconds=self.wait_time_seconds,
                VisibilityTimeout=self.visibility_timeout,
                MessageAttributeNames=["All"],
                AttributeNames=["SentTimestamp"],
            )
        except NotLeader:  # refused by the leader fence: nothing was sent, not an AWS failure
            raise
        except Exception as err:
            self._url = None
            raise CloudProviderError(f"ReceiveMessage {self.queue_name!r}: {err}") from err
        return [
            QueuedMessage(
                message_id=str(m.get("MessageId") or ""),
                receipt_handle=str(m.get("ReceiptHandle") or ""),
                message=messages.parse(m.get("Body")),
            )
            for m in response.get("Messages") or []
        ]

    async def delete(self, receipt_handle: str) -> None:
        """DeleteMessage.

        Raises:
            CloudProviderError: SQS refused (the message will be delivered again after its visibility timeout).
        """
        url = await self.url()
        try:
            await self.sqs.delete_message(QueueUrl=url, ReceiptHandle=receipt_handle)
        except NotLeader:  # refused by the leader fence: nothing was sent, not an AWS failure
            raise
        except Exception as err:
            raise CloudProviderError(f"DeleteMessage {self.queue_name!r}: {err}") from err

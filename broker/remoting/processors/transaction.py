"""END_TRANSACTION (37): a producer's commit or rollback of a half message (``broker.transaction``).

Rules (4.9.8 ``EndTransactionProcessor``): refused on a slave (SLAVE_NOT_AVAILABLE, as Apache);
header ``producerGroup, tranStateTableOffset, commitLogOffset, commitOrRollback (0/8/12),
fromTransactionCheck``; a half message that does not match the request is SYSTEM_ERROR naming
why. With ACL, the account needs PUB on the half message's real topic (ours; RocketMQ 4.9.8
checks nothing: see ``broker.remoting.permissions``). Producers send it oneway, so the answer is only seen by tools that ask with a response.
"""
from __future__ import annotations

from broker.remoting.acl import PUB, require_found
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC, ResponseCode as R
from broker.remoting.processors.common import HandlerRegistry, HeaderError, Processor, field_bool, field_int, field_str
from broker.remoting.server import RemotingConnection
from broker.transaction import EndTransactionError


class EndTransactionProcessor(Processor):
    def register(self, server: HandlerRegistry) -> None:
        server.register(RC.END_TRANSACTION, self.end_transaction)

    async def end_transaction(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        if not self.c.is_master():
            return cmd.response(R.SLAVE_NOT_AVAILABLE, "Message store is slave mode, so end transaction is forbidden. ")
        service = getattr(self.c, "transactions", None)
        if service is None:
            return cmd.response(R.SYSTEM_ERROR, "transactions are not running on this broker")
        try:
            group = field_str(cmd, "producerGroup", required=True) or ""
            table_offset = field_int(cmd, "tranStateTableOffset")
            phy = field_int(cmd, "commitLogOffset")
            what = field_int(cmd, "commitOrRollback")
            from_check = field_bool(cmd, "fromTransactionCheck")
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        try:
            # the permission table's "end-transaction": PUB on the half message's real topic
            await service.end(group, table_offset, phy, what, from_check,
                              authorize=lambda topic: require_found({topic: PUB}))
        except EndTransactionError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        return cmd.response(R.SUCCESS)

"""dledger/rpc"""

"""dledger/store"""

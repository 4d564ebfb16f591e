"""dledger"""

import ShareSyncNode
print("sharesync: not yet")

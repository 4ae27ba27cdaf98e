(** Proofs for [Perrank.v]: the per-rank receive and send lists are the
    restriction of one world schedule ([wplan]) to the rank; that world
    schedule keeps every guarantee of [Crossmeshproof.xplan_correct]; and no
    source rank sends more than its share of its cell's readers rounded up
    to one piece. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Uneven Crossmesh Crossmeshproof Balance Balanceproof Perrank.
Import ListNotations.

(** * Lists *)

Lemma all_some_map : forall A (l : list (option A)) xs, all_some l = Some xs -> l = map Some xs.
Proof.
  induction l as [|[x|] l IH]; simpl; intros xs H.
  - injection H as <-. reflexivity.
  - destruct (all_some l) as [ys|] eqn:E; [|discriminate]. injection H as <-. simpl. f_equal. auto.
  - discriminate.
Qed.

Lemma filter_repeat : forall A (P : A -> bool) x l, (forall y, In y l -> P y = true -> y = x) ->
  filter P l = repeat x (lsum (fun y => if P y then 1 else 0) l).
Proof.
  intros A P x l H. induction l as [|y l IH]; [reflexivity|]. cbn [filter lsum fold_right].
  fold (lsum (fun y => if P y then 1 else 0) l).
  destruct (P y) eqn:E; rewrite IH by (intros; apply H; auto; right; auto); [|reflexivity].
  rewrite (H y (or_introl eq_refl) E). reflexivity.
Qed.

Lemma skipn_cons_nth : forall A (l : list A) n x l', skipn n l = x :: l' ->
  nth_error l n = Some x /\ skipn (S n) l = l'.
Proof.
  induction l as [|a l IH]; intros [|n] x l' H; simpl in *; try discriminate.
  - injection H as -> ->. auto.
  - apply IH. exact H.
Qed.

Lemma firstn_snoc : forall A (l : list A) n x, nth_error l n = Some x -> firstn (S n) l = firstn n l ++ [x].
Proof.
  induction l as [|a l IH]; intros [|n] x H; simpl in *; try discriminate.
  - injection H as ->. reflexivity.
  - rewrite (IH n x H). reflexivity.
Qed.

Lemma flat_map_ext_in : forall A B (f g : A -> list B) l, (forall x, In x l -> f x = g x) ->
  flat_map f l = flat_map g l.
Proof.
  intros A B f g l H. induction l as [|x l IH]; [reflexivity|]. simpl. rewrite H by (left; auto).
  rewrite IH by (intros; apply H; right; auto). reflexivity.
Qed.

(** * One target's cells *)

Definition wsi (b : list nat) : list (nat * interval -> nat) :=
  map (fun k0 => fun kv : nat * interval => if fst kv =? k0 then 1 else 0) b.

Lemma wt_one : forall b ks B, length ks = length b -> length B = length b ->
  wt (wsi b) ks B = if nat_list_eqb ks b then 1 else 0.
Proof.
  induction b as [|k0 b IH]; intros [|k ks] [|iv B] H1 H2; simpl in *; try discriminate; auto.
  rewrite IH by lia. rewrite nat_list_eqb_cons.
  destruct (k =? k0), (nat_list_eqb ks b); simpl; lia.
Qed.

Lemma psums_meet : forall sd T b, box_okb sd T = true -> cell_okb sd b = true ->
  psums (wsi b) (cellsl sd T) = nmeet sd b T.
Proof.
  induction sd as [|[c n] sd IH]; intros [|[t L] T] [|k b]; simpl; try discriminate; auto.
  rewrite !andb_true_iff, !Nat.ltb_lt. intros [[Hc Hn] H] [Hk Hb].
  rewrite IH by auto. f_equal.
  transitivity (lsum (fun kv => if fst kv =? k then (fun iv => if 0 <? snd iv then 1 else 0) (snd kv) else 0)
                     (cells1 (c, n) (t, L))).
  - apply lsum_ext. intros [k' iv] Hin. apply in_cells1 in Hin. destruct Hin as [_ [_ Hp]].
    cbn [fst snd]. destruct (k' =? k); [|reflexivity]. apply Nat.ltb_lt in Hp. rewrite Hp. reflexivity.
  - pose proof (cells1_pick c n (t, L) (fun iv => if 0 <? snd iv then 1 else 0) k Hk) as HP.
    cbv beta in HP. refine (eq_trans (HP _) _); [|unfold isect; reflexivity].
    intros iv E. rewrite E. reflexivity.
Qed.

(** A target's box has [nmeet] pieces in cell [b]. *)
Lemma cells_meet : forall sd T b, box_okb sd T = true -> cell_okb sd b = true ->
  lsum (fun kb => if nat_list_eqb (fst kb) b then 1 else 0) (cells sd T) = nmeet sd b T.
Proof.
  intros sd T b H Hb. unfold cells.
  transitivity (lsum (fun kb => wt (wsi b) (fst kb) (snd kb)) (cart (cellsl sd T))).
  - apply lsum_ext. intros [ks B] Hin. apply in_cart in Hin. apply incart_length in Hin. simpl.
    pose proof (cell_okb_length _ _ Hb) as Hlb. rewrite cellsl_length in Hin by auto.
    pose proof (box_okb_length _ _ H) as HlT. destruct Hin as [Hk HB]. simpl in Hk, HB.
    rewrite wt_one by lia. reflexivity.
  - rewrite cart_wt. apply psums_meet; auto.
    unfold wsi. rewrite map_length, cellsl_length by auto.
    rewrite (cell_okb_length _ _ Hb). symmetry. apply box_okb_length; auto.
Qed.

Lemma nmeet_le1 : forall sd b T, nmeet sd b T <= 1.
Proof.
  induction sd as [|cn sd IH]; intros [|k b] [|iv T]; cbn [nmeet]; try lia.
  specialize (IH b T). destruct (0 <? snd (isect (fst cn) k iv)); lia.
Qed.

Lemma incart_owned : forall sd T ks B, incart (cellsl sd T) ks B -> B = owned sd ks T.
Proof.
  induction sd as [|[c n] sd IH]; intros [|iv T] [|k ks] [|ivb B]; simpl; try tauto.
  intros [Hin H]. apply in_cells1 in Hin. destruct Hin as [_ [-> _]]. f_equal. apply IH. exact H.
Qed.

(** The piece of a target's box in cell [b]: [owned sd b T] when the box meets [b], else none. *)
Lemma filter_cells : forall sd T b, box_okb sd T = true -> cell_okb sd b = true ->
  filter (fun kb => nat_list_eqb (fst kb) b) (cells sd T) = repeat (b, owned sd b T) (nmeet sd b T).
Proof.
  intros sd T b H Hb. rewrite (filter_repeat _ _ (b, owned sd b T)).
  - rewrite cells_meet; auto.
  - intros [ks B] Hin E. simpl in E. apply nat_list_eqb_spec in E. subst ks.
    apply in_cart in Hin. simpl in Hin. apply incart_owned in Hin. subst B. reflexivity.
Qed.

(** * Senders *)

Section Generic.
Variable sd : list (nat * nat).
Variable SR : list src.
Let tab := holder_table sd SR.

Lemma hof_eq : forall c, hof sd tab c = holders SR c.
Proof. intros c. apply holders_table. Qed.

Lemma choose_in : forall h self start k s, choose h self start k = Some s -> s = self \/ (In s h /\ memb self h = false).
Proof.
  intros h self start k s H. unfold choose in H. destruct (memb self h) eqn:E.
  - injection H as <-. auto.
  - destruct h as [|x h']; [discriminate|]. injection H as <-. right. split; auto. apply deal_in. discriminate.
Qed.

Lemma recv_all_spec : forall start tgs j self cl ps, recv_all sd tab start tgs j self cl = Some ps ->
  map (fun q => (pcell q, pbox q)) ps = cl /\
  forall q, In q ps -> choose (holders SR (pcell q)) self start (dealk sd tab (pcell q) tgs j) = Some (psrc q).
Proof.
  intros start tgs j self. induction cl as [|[ks B] cl IH]; simpl; intros ps H.
  - injection H as <-. simpl. split; auto. tauto.
  - destruct (choose (hof sd tab ks) self start (dealk sd tab ks tgs j)) as [r|] eqn:E1; [|discriminate].
    destruct (recv_all sd tab start tgs j self cl) as [ps'|] eqn:E2; [|discriminate].
    injection H as <-. destruct (IH ps' eq_refl) as [H1 H2]. simpl. rewrite H1. split; auto.
    intros q [<-|Hq]; simpl; auto. rewrite <- hof_eq. exact E1.
Qed.

(** Each received piece is [Crossmesh.pick_all]'s with its sender changed
    at most among the holders of its cell, where the target does not hold it. *)
Lemma recv_rel : forall start tgs j self cl ps, recv_all sd tab start tgs j self cl = Some ps ->
  exists psx, pick_all SR self j cl = Some psx /\ Forall2 (related SR self) psx ps.
Proof.
  intros start tgs j self. induction cl as [|[ks B] cl IH]; simpl; intros ps H.
  - injection H as <-. exists []. auto.
  - destruct (choose (hof sd tab ks) self start (dealk sd tab ks tgs j)) as [r|] eqn:E1; [|discriminate].
    destruct (recv_all sd tab start tgs j self cl) as [ps'|] eqn:E2; [|discriminate].
    injection H as <-. destruct (IH ps' eq_refl) as [psx [H1 H2]].
    rewrite hof_eq in E1. unfold pick, pick_from. unfold choose in E1.
    destruct (memb self (holders SR ks)) eqn:Em.
    + injection E1 as <-. rewrite H1. eexists; split; [reflexivity|]. constructor; auto.
      split; [|split]; auto.
    + destruct (holders SR ks) as [|x h'] eqn:Eh; [discriminate|]. injection E1 as <-.
      destruct (nth_error (x :: h') (j mod length (x :: h'))) as [r0|] eqn:E3.
      * rewrite H1. eexists; split; [reflexivity|]. constructor; auto.
        split; [|split]; auto. right. cbn [pcell psrc]. rewrite Eh. split; auto. apply deal_in. discriminate.
      * exfalso. apply nth_error_None in E3. pose proof (Nat.mod_upper_bound j (length (x :: h'))). simpl in *. lia.
Qed.

Lemma recv1_sched1 : forall start tgs j self T ps, nth_error tgs j = Some (self, T) ->
  recv1 sd tab start tgs j = Some ps ->
  exists psx, sched1 sd SR j (self, T) = Some psx /\ Forall2 (related SR self) psx ps.
Proof.
  intros start tgs j self T ps Ej H. unfold recv1 in H. rewrite Ej in H. cbn [fst snd] in H.
  destruct (box_okb sd T) eqn:Eb; [|discriminate].
  destruct (recv_rel _ _ _ _ _ _ H) as [psx [H1 H2]]. exists psx. unfold sched1. cbn [fst snd].
  rewrite Eb. auto.
Qed.

(** What a target sends from rank [r] (holding cell [c]) to another rank:
    its piece of [c] when it reads [c] and the deal gives it to [r]. *)
Lemma flat_map_cell : forall (c : list nat) (X : bool) (f : box -> piece) (cl : list (list nat * box)),
  flat_map (fun kb => if nat_list_eqb (fst kb) c && X then [f (snd kb)] else []) cl
  = if X then map (fun kb => f (snd kb)) (filter (fun kb => nat_list_eqb (fst kb) c) cl) else [].
Proof.
  intros c X f cl. induction cl as [|kb cl IH]; simpl; [destruct X; reflexivity|].
  rewrite IH. destruct (nat_list_eqb (fst kb) c), X; reflexivity.
Qed.

Lemma recv_send : forall start tgs j self T ps r c,
  NoDup (map fst SR) -> In (r, c) SR -> box_okb sd T = true -> cell_okb sd c = true ->
  recv_all sd tab start tgs j self (cells sd T) = Some ps ->
  filter (fun q => (psrc q =? r) && negb (self =? r)) ps
  = if reads sd tab c (self, T) && (deal (hof sd tab c) start (dealk sd tab c tgs j) =? r)
    then [mkpiece r c (owned sd c T)] else [].
Proof.
  intros start tgs j self T ps r c Hnd Hrc Hb Hc H.
  assert (Hrh : In r (holders SR c)) by (apply holders_in; exact Hrc).
  set (X := negb (memb self (holders SR c)) && (deal (holders SR c) start (dealk sd tab c tgs j) =? r)).
  assert (E : forall cl ps, recv_all sd tab start tgs j self cl = Some ps ->
    filter (fun q => (psrc q =? r) && negb (self =? r)) ps
    = flat_map (fun kb => if nat_list_eqb (fst kb) c && X then [mkpiece r c (snd kb)] else []) cl).
  { induction cl as [|[ks B] cl IH]; intros ps0 H0; cbn [recv_all fst snd] in H0.
    - injection H0 as <-. reflexivity.
    - destruct (choose (hof sd tab ks) self start (dealk sd tab ks tgs j)) as [s|] eqn:E1; [|discriminate].
      destruct (recv_all sd tab start tgs j self cl) as [ps'|] eqn:E2; [|discriminate].
      injection H0 as <-. cbn [filter flat_map fst snd psrc]. rewrite (IH ps' eq_refl).
      rewrite hof_eq in E1. unfold X.
      destruct (nat_list_eqb ks c) eqn:Ek.
      + apply nat_list_eqb_spec in Ek. subst ks. unfold choose in E1.
        destruct (memb self (holders SR c)) eqn:Em.
        * injection E1 as <-. cbn [negb andb]. destruct (self =? r); reflexivity.
        * destruct (holders SR c) as [|x h'] eqn:Eh; [contradiction|]. injection E1 as <-.
          cbn [negb andb].
          destruct (deal (x :: h') start (dealk sd tab c tgs j) =? r) eqn:Ed; [|reflexivity].
          apply Nat.eqb_eq in Ed. rewrite Ed.
          assert (Hs : (self =? r) = false).
          { apply Nat.eqb_neq. intros ->. rewrite <- Eh in Em. apply memb_spec in Hrh. congruence. }
          rewrite ?Nat.eqb_refl, Hs. reflexivity.
      + cbn [andb]. apply choose_in in E1.
        assert (Hsr : (s =? r) && negb (self =? r) = false).
        { destruct (Nat.eqb_spec s r) as [->|]; [|reflexivity].
          destruct E1 as [->|[Hin _]]; [rewrite Nat.eqb_refl; reflexivity|].
          apply in_holders in Hin. exfalso. pose proof (nodup_fst _ _ _ _ Hnd Hrc Hin) as Eq.
          subst ks. rewrite (proj2 (nat_list_eqb_spec c c) eq_refl) in Ek. discriminate. }
        rewrite Hsr. reflexivity. }
  rewrite (E _ _ H), flat_map_cell, filter_cells by auto.
  unfold reads, X. cbn [fst snd]. rewrite hof_eq.
  pose proof (nmeet_le1 sd c T) as Hle.
  destruct (memb self (holders SR c)); destruct (deal (holders SR c) start (dealk sd tab c tgs j) =? r);
    destruct (nmeet sd c T) as [|[|n]]; cbn; try reflexivity; lia.
Qed.

Lemma dealk_S : forall c tgs j tg, nth_error tgs j = Some tg ->
  dealk sd tab c tgs (S j) = dealk sd tab c tgs j + (if reads sd tab c tg then 1 else 0).
Proof.
  intros c tgs j tg E. unfold dealk. rewrite (firstn_snoc _ _ _ _ E), filter_app, app_length.
  cbn. destruct (reads sd tab c tg); reflexivity.
Qed.

(** The sweep is the per-target rule read along the targets. *)
Lemma sweep_eq : forall start r c h tgs suf j0, skipn j0 tgs = suf ->
  sweep sd tab start r c h (dealk sd tab c tgs j0) j0 suf
  = flat_map (fun j => match nth_error tgs j with
                       | Some tg => if reads sd tab c tg && (deal h start (dealk sd tab c tgs j) =? r)
                                    then [(j, mkpiece r c (owned sd c (snd tg)))] else []
                       | None => [] end) (seq j0 (length suf)).
Proof.
  intros start r c h tgs. induction suf as [|tg suf IH]; intros j0 E; [reflexivity|].
  destruct (skipn_cons_nth _ _ _ _ _ E) as [E1 E2].
  cbn [sweep length seq flat_map]. rewrite E1.
  rewrite <- (IH (S j0) E2), (dealk_S c tgs j0 tg E1).
  destruct (reads sd tab c tg); cbn [andb].
  - rewrite Nat.add_1_r. destruct (deal h start (dealk sd tab c tgs j0) =? r); reflexivity.
  - rewrite Nat.add_0_r. reflexivity.
Qed.

(** How many pieces the sweep gives to holder number [i] of [h]. *)
Lemma sweep_count : forall start r c h i, NoDup h -> i < length h -> nth i h 0 = r ->
  forall tgs cnt j, length (sweep sd tab start r c h cnt j tgs)
                    = win (length h) i (start + cnt) (length (filter (reads sd tab c) tgs)).
Proof.
  intros start r c h i Hnd Hi Hr. induction tgs as [|tg tgs IH]; intros cnt j; [reflexivity|].
  cbn [sweep filter]. destruct (reads sd tab c tg).
  - rewrite app_length, IH.
    change (length (tg :: filter (reads sd tab c) tgs)) with (1 + length (filter (reads sd tab c) tgs)).
    rewrite win_app. replace (start + cnt + 1) with (start + S cnt) by lia. f_equal.
    unfold win. cbn. rewrite Nat.add_0_r, <- Hr, (deal_eqb h start cnt i Hnd Hi).
    destruct ((start + cnt) mod length h =? i); reflexivity.
  - apply IH.
Qed.

End Generic.

(** * On meshes *)

Lemma wplan_spec : forall m1 r1 t1 m2 r2 t2 start pss, wplan m1 r1 t1 m2 r2 t2 start = Some pss ->
  xguard m1 r1 t1 m2 r2 t2 = true /\ srcs_okb (sdims m1 t1) (srcs m1 r1 t1) = true /\
  map (recv1 (sdims m1 t1) (holder_table (sdims m1 t1) (srcs m1 r1 t1)) start (tgts m2 r2 t2))
      (seq 0 (length (tgts m2 r2 t2))) = map Some pss.
Proof.
  intros m1 r1 t1 m2 r2 t2 start pss H. unfold wplan, wsched in H.
  destruct (xguard m1 r1 t1 m2 r2 t2); [|discriminate].
  destruct (srcs_okb (sdims m1 t1) (srcs m1 r1 t1)); [|discriminate].
  repeat split; auto. apply all_some_map. exact H.
Qed.

Lemma tgts_length : forall m r t, length (tgts m r t) = ndevices m.
Proof. intros. rewrite tgts_nth_map, map_length, seq_length. reflexivity. Qed.

Lemma tgts_nth_error : forall m r t j, j < ndevices m ->
  nth_error (tgts m r t) j = Some (nth j r 0, tbox m t (coords_of_rank m j)).
Proof. intros. rewrite tgts_nth_map, nth_error_map, nth_error_seq0 by auto. reflexivity. Qed.

(** **Restriction, receiving side**: each target device's own receive list
    is its entry of the world schedule ([rank_recv] reads no other entry). *)
Theorem rank_recv_restrict : forall m1 r1 t1 m2 r2 t2 start pss,
  wplan m1 r1 t1 m2 r2 t2 start = Some pss ->
  length pss = ndevices m2 /\ forall j, rank_recv m1 r1 t1 m2 r2 t2 start j = nth_error pss j.
Proof.
  intros m1 r1 t1 m2 r2 t2 start pss H. destruct (wplan_spec _ _ _ _ _ _ _ _ H) as [Hg [Hs Hm]].
  assert (Hl : length pss = ndevices m2).
  { apply (f_equal (@length _)) in Hm. rewrite !map_length, seq_length, tgts_length in Hm. lia. }
  split; [exact Hl|]. intros j. unfold rank_recv. rewrite Hg, Hs. cbn [andb].
  destruct (Nat.lt_ge_cases j (ndevices m2)) as [Hj|Hj].
  - apply (f_equal (fun l => nth_error l j)) in Hm. rewrite !nth_error_map, nth_error_seq0 in Hm
      by (rewrite tgts_length; exact Hj).
    destruct (nth_error pss j); cbn in Hm; congruence.
  - unfold recv1. rewrite (proj2 (nth_error_None (tgts m2 r2 t2) j)) by (rewrite tgts_length; exact Hj).
    symmetry. apply nth_error_None. lia.
Qed.

Lemma wplan_entry : forall m1 r1 t1 m2 r2 t2 start pss j, wplan m1 r1 t1 m2 r2 t2 start = Some pss ->
  j < ndevices m2 ->
  recv1 (sdims m1 t1) (holder_table (sdims m1 t1) (srcs m1 r1 t1)) start (tgts m2 r2 t2) j
    = Some (nth j pss []).
Proof.
  intros m1 r1 t1 m2 r2 t2 start pss j H Hj.
  destruct (rank_recv_restrict _ _ _ _ _ _ _ _ H) as [Hl Hr]. specialize (Hr j).
  destruct (wplan_spec _ _ _ _ _ _ _ _ H) as [Hg [Hs _]]. unfold rank_recv in Hr. rewrite Hg, Hs in Hr. cbn [andb] in Hr.
  rewrite Hr. apply nth_error_nth'. lia.
Qed.

(** **Restriction, sending side**: what source device [i] (world rank
    [nth i r1 0]) sends, computed in one pass over the targets' boxes, is
    exactly the world schedule's pieces it sends to other ranks, with their
    target devices, in target order. *)
Theorem rank_send_restrict : forall m1 r1 t1 m2 r2 t2 start pss,
  wplan m1 r1 t1 m2 r2 t2 start = Some pss ->
  forall i, i < ndevices m1 ->
  rank_send m1 r1 t1 m2 r2 t2 start i
  = Some (flat_map (fun j => map (pair j) (filter (fun q => (psrc q =? nth i r1 0) && negb (nth j r2 0 =? nth i r1 0))
                                                   (nth j pss [])))
                   (seq 0 (ndevices m2))).
Proof.
  intros m1 r1 t1 m2 r2 t2 start pss H i Hi.
  destruct (wplan_spec _ _ _ _ _ _ _ _ H) as [Hg [Hs _]].
  set (sd := sdims m1 t1) in *. set (SR := srcs m1 r1 t1) in *. set (tgs := tgts m2 r2 t2).
  set (c := blocks m1 t1 (coords_of_rank m1 i)). set (r := nth i r1 0).
  unfold srcs_okb in Hs. apply andb_true_iff in Hs as [Hnd Hok]. apply nodup_fast_spec in Hnd.
  rewrite forallb_forall in Hok.
  assert (Hrc : In (r, c) SR).
  { unfold SR, r, c. rewrite srcs_nth. apply in_map_iff. exists i. split; auto. apply in_seq. lia. }
  assert (Hc : cell_okb sd c = true) by exact (Hok _ Hrc).
  unfold rank_send. fold sd SR tgs c r. rewrite Hg. unfold srcs_okb. fold SR.
  rewrite (proj2 (nodup_fast_spec _) Hnd), (proj2 (forallb_forall _ _) Hok). cbn [andb]. f_equal.
  change 0 with (dealk sd (holder_table sd SR) c tgs 0) at 1.
  rewrite (sweep_eq sd SR start r c _ tgs tgs 0 eq_refl). unfold tgs. rewrite tgts_length.
  apply flat_map_ext_in. intros j Hj. apply in_seq in Hj.
  rewrite (tgts_nth_error m2 r2 t2 j) by lia.
  pose proof (wplan_entry _ _ _ _ _ _ _ _ j H ltac:(lia)) as Ej. fold sd SR in Ej.
  unfold recv1 in Ej. rewrite (tgts_nth_error m2 r2 t2 j) in Ej by lia. cbn [fst snd] in Ej.
  destruct (box_okb sd (tbox m2 t2 (coords_of_rank m2 j))) eqn:Eb; [|discriminate].
  rewrite (recv_send sd SR start tgs j _ _ _ r c Hnd Hrc Eb Hc Ej). cbn [snd].
  destruct (_ && _); reflexivity.
Qed.

(** **End to end, per rank**: the world schedule whose entries are the
    ranks' own receive lists keeps every guarantee of [xplan_correct]: one
    entry per target device; every target assembles exactly its block of
    any global array; every element of its block arrives once, from a source
    rank whose block holds it; the pieces add up to its block; it receives
    from other ranks its block size less what it already holds. *)
Theorem wplan_correct : forall m1 r1 t1 m2 r2 t2 start pss,
  wplan m1 r1 t1 m2 r2 t2 start = Some pss ->
  xschedule_ok m1 r1 t1 m2 r2 t2 pss.
Proof.
  unfold xschedule_ok.
  intros m1 r1 t1 m2 r2 t2 start pss H.
  destruct (rank_recv_restrict _ _ _ _ _ _ _ _ H) as [Hl _].
  destruct (wplan_spec _ _ _ _ _ _ _ _ H) as [_ [Hs _]].
  unfold srcs_okb in Hs. apply andb_true_iff in Hs as [Hnd Hok]. apply nodup_fast_spec in Hnd.
  rewrite forallb_forall in Hok.
  split; [exact Hl|]. intros j Hj.
  set (T := tbox m2 t2 (coords_of_rank m2 j)).
  pose proof (wplan_entry _ _ _ _ _ _ _ _ j H Hj) as Ej.
  destruct (recv1_sched1 (sdims m1 t1) (srcs m1 r1 t1) start (tgts m2 r2 t2) j (nth j r2 0) T _
              (tgts_nth_error m2 r2 t2 j Hj) Ej) as [psx [Hx Hr]].
  exists (nth j pss []). split; [apply nth_error_nth'; lia|].
  assert (Hsx : forall q, In q psx -> In (psrc q, pcell q) (srcs m1 r1 t1)) by
    (intros q Hq; apply (sched1_sound _ _ _ _ _ _ Hx q Hq)).
  assert (Hcov : forall p, in_boxb p T = true -> lsum (fun q => if in_boxb p (pbox q) then 1 else 0) (nth j pss []) = 1).
  { intros p Hp. rewrite (lsum_rel_box _ _ (fun B => if in_boxb p B then 1 else 0) _ _ Hr).
    apply (sched1_cover _ _ _ _ _ _ Hx); auto. }
  assert (Hsnd : forall q, In q (nth j pss []) -> In (psrc q, pcell q) (srcs m1 r1 t1) /\
       forall p, in_boxb p (pbox q) = true -> in_boxb p T = true /\ in_boxb p (cellbox (sdims m1 t1) (pcell q)) = true).
  { intros q' Hq'. destruct (sound_rel _ _ _ _ Hr q' Hq') as [q [Hq [Ec [Eb Es]]]].
    destruct (sched1_sound _ _ _ _ _ _ Hx q Hq) as [Hin Hbox]. rewrite Ec, Eb. split; [|exact Hbox].
    destruct Es as [Es|Es]; [rewrite Es; exact Hin|]. rewrite <- Ec. apply in_holders. rewrite Ec. exact Es. }
  split; [|split; [exact Hcov|split; [exact Hsnd|split]]].
  - intros V A L HL i Hi. rewrite <- shift_tbox. apply (assemble_sound _ (srcs m1 r1 t1)); auto.
    + intros r b Hin k. apply in_srcs in Hin. destruct Hin as [i' [Hi' Es]]. injection Es as -> ->.
      rewrite HL by auto. rewrite shift_cellbox. auto.
    + apply tbox_valid; auto.
  - rewrite (lsum_rel_box _ _ vol _ _ Hr). apply (sched1_volume _ _ _ _ _ _ Hx).
  - rewrite (traffic_rel _ _ _ _ Hr Hsx). apply (sched1_traffic _ _ _ _ _ _ Hx); auto.
Qed.

(** **Senders balanced, per rank**: source device [i] (world rank [r],
    holding cell [c] with [g] holders) sends to other ranks at most
    [ceil (readers / g)] pieces, [readers] the target devices whose block
    meets [c] and that do not hold [c]: its share rounded up to one piece;
    each piece is the part of a reader's block inside [c], so its elements
    are at most that many times the largest such part. *)
Theorem rank_send_balanced : forall m1 r1 t1 m2 r2 t2 start pss,
  wplan m1 r1 t1 m2 r2 t2 start = Some pss ->
  forall i sl, i < ndevices m1 -> rank_send m1 r1 t1 m2 r2 t2 start i = Some sl ->
  let sd := sdims m1 t1 in
  let c := blocks m1 t1 (coords_of_rank m1 i) in
  let tab := holder_table sd (srcs m1 r1 t1) in
  let g := length (holders (srcs m1 r1 t1) c) in
  length sl * g <= length (filter (reads sd tab c) (tgts m2 r2 t2)) + g - 1 /\
  forall x, In x sl -> psrc (snd x) = nth i r1 0 /\ pcell (snd x) = c /\
    exists T, In (nth (fst x) r2 0, T) (tgts m2 r2 t2) /\ reads sd tab c (nth (fst x) r2 0, T) = true /\
              pbox (snd x) = owned sd c T.
Proof.
  intros m1 r1 t1 m2 r2 t2 start pss H i sl Hi Hsl sd c tab g.
  destruct (wplan_spec _ _ _ _ _ _ _ _ H) as [Hg [Hs _]].
  unfold srcs_okb in Hs. apply andb_true_iff in Hs as [Hnd Hok]. apply nodup_fast_spec in Hnd.
  assert (Hrc : In (nth i r1 0, c) (srcs m1 r1 t1)).
  { unfold c. rewrite srcs_nth. apply in_map_iff. exists i. split; auto. apply in_seq. lia. }
  assert (Hrh : In (nth i r1 0) (holders (srcs m1 r1 t1) c)) by (apply holders_in; exact Hrc).
  destruct (In_nth _ _ 0 Hrh) as [k [Hk Hkr]].
  unfold rank_send in Hsl. rewrite Hg in Hsl. unfold srcs_okb in Hsl.
  rewrite (proj2 (nodup_fast_spec _) Hnd), Hok in Hsl. cbn [andb] in Hsl. injection Hsl as <-.
  unfold hof. rewrite holders_table. fold sd c tab. split.
  - rewrite (sweep_count sd (srcs m1 r1 t1) start (nth i r1 0) c _ k (nodup_holders _ _ Hnd) Hk Hkr).
    rewrite Nat.add_0_r. apply win_bound; fold g; lia.
  - intros x Hx.
    assert (Gen : forall suf cnt j0, skipn j0 (tgts m2 r2 t2) = suf ->
      In x (sweep sd tab start (nth i r1 0) c (holders (srcs m1 r1 t1) c) cnt j0 suf) ->
      psrc (snd x) = nth i r1 0 /\ pcell (snd x) = c /\
      exists T, In (nth (fst x) r2 0, T) (tgts m2 r2 t2) /\ reads sd tab c (nth (fst x) r2 0, T) = true /\
                pbox (snd x) = owned sd c T).
    { induction suf as [|tg suf IH]; intros cnt j0 E Hin; [destruct Hin|].
      destruct (skipn_cons_nth _ _ _ _ _ E) as [E1 E2]. cbn [sweep] in Hin.
      destruct (reads sd tab c tg) eqn:Er.
      + apply in_app_or in Hin. destruct Hin as [Hin|Hin]; [|exact (IH _ _ E2 Hin)].
        destruct (deal _ start cnt =? nth i r1 0); [|destruct Hin].
        destruct Hin as [<-|[]]. cbn [fst snd psrc pcell pbox]. split; [reflexivity|split; [reflexivity|]].
        assert (Hj : j0 < ndevices m2) by (rewrite <- (tgts_length m2 r2 t2); apply nth_error_Some; congruence).
        pose proof (tgts_nth_error m2 r2 t2 j0 Hj) as Et. rewrite Et in E1. injection E1 as <-.
        cbn [fst snd] in Er |- *.
        exists (tbox m2 t2 (coords_of_rank m2 j0)). split; [|split; [exact Er|reflexivity]].
        apply nth_error_In with (n := j0). exact Et.
      + exact (IH _ _ E2 Hin). }
    exact (Gen _ 0 0 eq_refl Hx).
Qed.
